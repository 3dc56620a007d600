// Activity records (emSetActivityCallback): each kernel and copy, timed on
// the thread that did it, with the issuing thread's correlation id taken at
// the issue, the next launch's name, and nothing once the callback is gone.

#include "selftest.h"

#include <unistd.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Seen {
  emActivity activity;
  std::string name;
  std::thread::id thread;
};

struct Log {
  std::mutex mutex;
  std::vector<Seen> seen;
};

void record_activity(const emActivity* activity, void* user) {
  auto* log = static_cast<Log*>(user);
  std::lock_guard<std::mutex> lock(log->mutex);
  log->seen.push_back({*activity, activity->name ? activity->name : "",
                       std::this_thread::get_id()});
}

} // namespace

void test_activities() {
  Log log;
  void* d = nullptr;
  CHECK_OK(emMalloc(&d, 64));
  char host[64] = {};
  void* const buffers[] = {d};

  // Off: nothing is timed or reported.
  CHECK_OK(emLaunchKernel([](void*) {}, nullptr, buffers, 1));
  CHECK(log.seen.empty());

  CHECK_OK(emSetActivityCallback(record_activity, &log));
  CHECK_OK(emActivityPushCorrelationId(41));
  CHECK_OK(emActivityPushCorrelationId(42));
  CHECK_OK(emSetNextLaunchName("fused_kernel"));
  CHECK_OK(emLaunchKernel(
      [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); },
      nullptr, buffers, 1));
  CHECK_OK(emLaunchKernel([](void*) {}, nullptr, buffers, 1)); // name taken
  CHECK_OK(emMemcpy(d, host, 64, emMemcpyHostToDevice));
  uint64_t popped = 0;
  CHECK_OK(emActivityPopCorrelationId(&popped));
  CHECK(popped == 42);
  CHECK(log.seen.size() == 3);
  const emActivity& k = log.seen[0].activity;
  CHECK(k.kind == emActivityKernel && log.seen[0].name == "fused_kernel");
  CHECK(k.device == 0 && k.stream == 0 && k.correlation_id == 42);
  CHECK(k.end_ns - k.start_ns >= 2000000); // the kernel's 2 ms
  CHECK(k.issue_start_ns <= k.start_ns && k.end_ns <= k.issue_end_ns);
  CHECK(k.issue_thread == static_cast<uint64_t>(gettid()));
  CHECK(log.seen[0].thread == std::this_thread::get_id());
  CHECK(log.seen[1].name.empty() && log.seen[1].activity.name == nullptr);
  const emActivity& c = log.seen[2].activity;
  CHECK(c.kind == emActivityMemcpy && c.async == 0 && c.bytes == 64);
  CHECK(c.memcpy_kind == emMemcpyHostToDevice && c.start_ns <= c.end_ns);

  // An asynchronous copy is reported by the worker that did it, when done,
  // with the id that was innermost when it was queued.
  emStream_t s = 0;
  CHECK_OK(emStreamCreate(1, &s));
  void* d1 = nullptr;
  CHECK_OK(emSetDevice(1));
  CHECK_OK(emMalloc(&d1, 64));
  CHECK_OK(emSetDevice(0));
  log.seen.clear();
  CHECK_OK(emSleepAsync(2000, 1, s));
  CHECK_OK(emMemcpyAsync(host, d1, 32, emMemcpyDeviceToHost, 1, s));
  CHECK_OK(emActivityPopCorrelationId(nullptr)); // 41, before the copy runs
  {
    std::lock_guard<std::mutex> lock(log.mutex);
    CHECK(log.seen.empty()); // queued behind the sleep
  }
  CHECK_OK(emStreamSynchronize(1, s));
  CHECK(log.seen.size() == 2);
  const emActivity& z = log.seen[0].activity; // the sleep, as long as asked
  CHECK(z.kind == emActivitySleep && z.end_ns - z.start_ns >= 2000000);
  CHECK(z.device == 1 && z.stream == s && z.correlation_id == 41);
  const emActivity& a = log.seen[1].activity;
  CHECK(a.kind == emActivityMemcpy && a.async == 1 && a.bytes == 32);
  CHECK(a.device == 1 && a.stream == s && a.correlation_id == 41);
  CHECK(a.memcpy_kind == emMemcpyDeviceToHost);
  CHECK(a.issue_end_ns <= a.start_ns && z.end_ns <= a.start_ns);
  CHECK(log.seen[1].thread != std::this_thread::get_id());

  // An event record: when its stream reaches it (at once if idle).
  emSyncEvent_t e = 0;
  CHECK_OK(emSyncEventCreate(1, &e, emSyncEventDefault));
  log.seen.clear();
  CHECK_OK(emSyncEventRecord(e, 1, s)); // idle: reached now
  CHECK_OK(emSleepAsync(1000, 1, s));
  CHECK_OK(emSyncEventRecord(e, 1, s)); // reached by the worker
  CHECK_OK(emSyncEventSynchronize(e));
  CHECK_OK(emStreamSynchronize(1, s));
  CHECK(log.seen.size() == 3);
  const emActivity& r0 = log.seen[0].activity;
  const emActivity& r1 = log.seen[2].activity;
  CHECK(r0.kind == emActivitySyncEventRecord && r0.sync_event == e);
  CHECK(r0.start_ns == r0.end_ns && r0.stream == s && r0.device == 1);
  CHECK(r1.kind == emActivitySyncEventRecord && r1.sync_event == e);
  CHECK(r1.start_ns >= log.seen[1].activity.end_ns); // after the sleep
  CHECK_OK(emSyncEventDestroy(e));

  // A graph: a named by-value launch captured, then replayed. The capture
  // runs nothing and reports nothing; each replay reports its kernels under
  // their captured names, with the replay call as their issue.
  CHECK_OK(emSetStream(0, 0));
  emStream_t g = 0;
  CHECK_OK(emStreamCreate(0, &g));
  CHECK_OK(emSetStream(0, g));
  CHECK_OK(emStreamBeginCapture(0, g));
  const int arg = 0;
  CHECK_OK(emSetNextLaunchName("captured_kernel"));
  CHECK_OK(emLaunchKernelByValue([](void*) {}, &arg, sizeof arg, buffers, 1));
  CHECK_OK(emLaunchKernelByValue([](void*) {}, &arg, sizeof arg, buffers, 1));
  emGraph_t graph = 0;
  CHECK_OK(emStreamEndCapture(0, g, &graph));
  CHECK_OK(emSetStream(0, 0));
  log.seen.clear();
  CHECK_OK(emGraphLaunch(graph, 0, g));
  CHECK(log.seen.size() == 2);
  CHECK(log.seen[0].name == "captured_kernel" && log.seen[1].name.empty());
  for (const Seen& n : log.seen) {
    CHECK(n.activity.kind == emActivityKernel && n.activity.graph == graph);
    CHECK(n.activity.stream == g && n.activity.device == 0);
  }
  CHECK(log.seen[0].activity.issue_start_ns ==
        log.seen[1].activity.issue_start_ns);
  CHECK(log.seen[0].activity.issue_end_ns == log.seen[1].activity.end_ns);
  CHECK_OK(emGraphDestroy(graph));

  // The stack is per thread; popping an empty one fails.
  CHECK_EM(emActivityPopCorrelationId(nullptr), emErrorInvalidValue);

  // Removed: nothing more.
  CHECK_OK(emSetActivityCallback(nullptr, nullptr));
  log.seen.clear();
  CHECK_OK(emLaunchKernel([](void*) {}, nullptr, buffers, 1));
  CHECK_OK(emMemcpy(host, d, 8, emMemcpyDeviceToHost));
  CHECK(log.seen.empty());
  CHECK_OK(emFree(d));
  CHECK_OK(emFree(d1));
}
