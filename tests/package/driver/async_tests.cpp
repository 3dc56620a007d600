// Asynchronous kernels (emLaunchKernelAsync): queued in stream order, run by
// the stream's worker as kernels, with their buffers kept alive; and their
// sticky failures (emKernelFail), passed on through events to other streams
// and to host kernels and copies, which then do not run.

#include "selftest.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

// What one asynchronous kernel saw, read by the test once its stream is
// synchronized.
struct Seen {
  int before = -1;            // buf[0] when the kernel started
  int device = -1;            // emGetDevice inside the kernel
  emStream_t stream = -1;     // emGetStream(device) inside the kernel
  emError_t offset = emErrorInvalidValue;   // emGetKernelOffset
  emError_t sync = emSuccess;               // emStreamSynchronize of its own
  bool nested_ran = false;    // a nested emLaunchKernel ran at once
  std::thread::id thread;
};

// The kernel's argument: owned by the kernel, which deletes it.
struct Arg {
  int* buf;       // device address
  int value;      // written to buf[0]
  int sleep_ms;
  int device;
  emStream_t stream;
  Seen* seen;
};

void async_kernel(void* p) {
  Arg* arg = static_cast<Arg*>(p);
  Seen& seen = *arg->seen;
  seen.thread = std::this_thread::get_id();
  ptrdiff_t offset = 0;
  seen.offset = emGetKernelOffset(&offset);
  int* buf = reinterpret_cast<int*>(reinterpret_cast<char*>(arg->buf) + offset);
  seen.before = buf[0];
  emGetDevice(&seen.device);
  emGetStream(seen.device, &seen.stream);
  seen.sync = emStreamSynchronize(arg->device, arg->stream);
  bool* nested = &seen.nested_ran;
  emLaunchKernel([](void* flag) { *static_cast<bool*>(flag) = true; }, nested,
                 nullptr, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(arg->sleep_ms));
  buf[0] = arg->value;
  delete arg;
}

std::atomic<int> calls{0};

void count_call(void*) { ++calls; }

void fail_kernel(void* detail) {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  emKernelFail(static_cast<const char*>(detail));
  ++calls;
}

struct Activities {
  std::mutex mutex;
  std::vector<emActivity> kernels;
  std::vector<std::string> names;
};

void record_activity(const emActivity* a, void* user) {
  auto* log = static_cast<Activities*>(user);
  if (a->kind != emActivityKernel) return;
  std::lock_guard<std::mutex> lock(log->mutex);
  log->kernels.push_back(*a);
  log->names.push_back(a->name != nullptr ? a->name : "");
}

std::vector<emEvent> launches;

void record_launch(const emEvent* event, void*) {
  if (event->kind == emEventKernelLaunch) launches.push_back(*event);
}

} // namespace

void test_async_kernels() {
  for (int device : {0, 1}) {
    CHECK_OK(emSetDevice(device));
    emStream_t s = 0;
    CHECK_OK(emStreamCreate(device, &s));
    int* buf = nullptr;
    CHECK_OK(emMalloc(reinterpret_cast<void**>(&buf), 4096));
    const int zero = 0;
    CHECK_OK(emMemcpy(buf, &zero, sizeof(int), emMemcpyHostToDevice));

    // Earlier work (a sleep, then a copy of 1), the kernel (sees 1, writes
    // 2), later work (a copy back): the kernel goes between them.
    static const int one = 1;
    int back = -1;
    Seen seen;
    CHECK_OK(emSleepAsync(30000, device, s));
    CHECK_OK(emMemcpyAsync(buf, &one, sizeof(int), emMemcpyHostToDevice,
                           device, s));
    void* const buffers[] = {buf};
    const double before = now_ms();
    CHECK_OK(emLaunchKernelAsync(async_kernel,
                                 new Arg{buf, 2, 50, device, s, &seen},
                                 buffers, 1, device, s));
    CHECK(now_ms() - before < 20); // returns at once: the kernel sleeps 50 ms
    CHECK_OK(emMemcpyAsync(&back, buf, sizeof(int), emMemcpyDeviceToHost,
                           device, s));
    CHECK(stream_idle(device, s) == 0);
    // Freed before the kernel runs: kept from reuse until it has.
    CHECK_OK(emFree(buf));
    void* other = nullptr;
    CHECK_OK(emMalloc(&other, 4096));
    CHECK(other != buf);
    CHECK_OK(emStreamSynchronize(device, s));
    CHECK(now_ms() - before >= 75);
    CHECK(seen.before == 1);
    CHECK(back == 2);
    CHECK(seen.offset == emSuccess);
    CHECK(seen.device == device);
    CHECK(seen.stream == s);
    CHECK(seen.sync == emErrorInvalidValue); // waits refused in the kernel
    CHECK(seen.nested_ran);
    CHECK(seen.thread != std::this_thread::get_id()); // the worker's
    CHECK_OK(emFree(other));
  }
  CHECK_OK(emSetDevice(0));

  // Bad arguments: nothing queued, fn never called.
  calls = 0;
  int dummy = 0;
  void* const host_buffer[] = {&dummy};
  CHECK_EM(emLaunchKernelAsync(nullptr, nullptr, nullptr, 0, 0, 0),
           emErrorInvalidValue);
  CHECK_EM(emLaunchKernelAsync(count_call, nullptr, nullptr, 1, 0, 0),
           emErrorInvalidValue);
  CHECK_EM(emLaunchKernelAsync(count_call, nullptr, host_buffer, 1, 0, 0),
           emErrorInvalidValue);
  CHECK_EM(emLaunchKernelAsync(count_call, nullptr, nullptr, 0, 2, 0),
           emErrorInvalidDevice);
  CHECK_EM(emLaunchKernelAsync(count_call, nullptr, nullptr, 0, 0, 987654),
           emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "stream 987654 does not exist"));
  // Not on a capturing stream: the capture is invalidated.
  emStream_t capturing = 0;
  CHECK_OK(emStreamCreate(0, &capturing));
  CHECK_OK(emStreamBeginCapture(0, capturing));
  CHECK_EM(emLaunchKernelAsync(count_call, nullptr, nullptr, 0, 0, capturing),
           emErrorStreamCapture);
  CHECK(detail_has(emErrorStreamCapture, "asynchronous kernels"));
  emGraph_t graph = 0;
  CHECK_EM(emStreamEndCapture(0, capturing, &graph), emErrorStreamCapture);
  CHECK_OK(emDeviceSynchronize(0));
  CHECK(calls == 0);
  // Only a worker's kernel can fail.
  CHECK_EM(emKernelFail("no"), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "outside a kernel"));
  emError_t in_host_kernel = emSuccess;
  CHECK_OK(emLaunchKernel(
      [](void* status) {
        *static_cast<emError_t*>(status) = emKernelFail("no");
      },
      &in_host_kernel, nullptr, 0));
  CHECK(in_host_kernel == emErrorInvalidValue);

  // A tool sees the launch when it is queued (async), and the kernel's run,
  // on the stream's track, with the name the launch took.
  Activities log;
  launches.clear();
  CHECK_OK(emSetEventCallback(record_launch, nullptr));
  CHECK_OK(emSetActivityCallback(record_activity, &log));
  emStream_t s = 0;
  CHECK_OK(emStreamCreate(1, &s));
  {
    std::string name = "allreduce_kernel"; // gone before the worker runs it
    CHECK_OK(emSetNextLaunchName(name.c_str()));
    CHECK_OK(emSleepAsync(10000, 1, s));
    CHECK_OK(emLaunchKernelAsync(count_call, nullptr, nullptr, 0, 1, s));
    name.assign("overwritten_name");
  }
  CHECK_OK(emSetEventCallback(nullptr, nullptr));
  CHECK_OK(emStreamSynchronize(1, s));
  CHECK_OK(emSetActivityCallback(nullptr, nullptr));
  CHECK(launches.size() == 1);
  if (launches.size() == 1) {
    CHECK(launches[0].async == 1);
    CHECK(launches[0].device == 1);
    CHECK(launches[0].stream == s);
  }
  CHECK(log.kernels.size() == 1);
  if (log.kernels.size() == 1) {
    const emActivity& k = log.kernels[0];
    CHECK(k.device == 1 && k.stream == s && k.async == 1);
    CHECK(log.names[0] == "allreduce_kernel");
    CHECK(k.issue_start_ns <= k.issue_end_ns);
    CHECK(k.issue_end_ns <= k.start_ns && k.start_ns <= k.end_ns);
  }
}

// Runs in a forked child: a failure is sticky for the life of the process,
// and the parent's streams should stay clean for the tests after this one.
static void kernel_failure_checks() {
  static char detail[] = "eccl: rank 3 timed out";
  emStream_t a = 0;
  emStream_t b = 0;
  CHECK_OK(emStreamCreate(0, &a));
  CHECK_OK(emStreamCreate(1, &b));
  emSyncEvent_t early = 0;
  emSyncEvent_t late = 0;
  CHECK_OK(emSyncEventCreate(0, &early, 0));
  CHECK_OK(emSyncEventCreate(0, &late, 0));

  // Queued: an event before the failing kernel, one after it, and a kernel
  // after it, which still runs (it owns its argument).
  calls = 0;
  CHECK_OK(emSleepAsync(10000, 0, a));
  CHECK_OK(emSyncEventRecord(early, 0, a));
  CHECK_OK(emLaunchKernelAsync(fail_kernel, detail, nullptr, 0, 0, a));
  CHECK_OK(emSyncEventRecord(late, 0, a));
  CHECK_OK(emLaunchKernelAsync(count_call, nullptr, nullptr, 0, 0, a));
  CHECK_EM(emStreamSynchronize(0, a), emErrorLaunchFailure);
  CHECK(std::strcmp(emGetErrorDetail(emErrorLaunchFailure), detail) == 0);
  CHECK(std::strcmp(emGetErrorString(emErrorLaunchFailure),
                    "an asynchronous kernel failed") == 0);
  CHECK(calls == 2);
  CHECK_EM(emStreamSynchronize(0, a), emErrorLaunchFailure); // sticky
  CHECK(stream_idle(0, a) == 1); // queries report completion only
  CHECK_EM(emDeviceSynchronize(0), emErrorLaunchFailure);
  CHECK(detail_has(emErrorLaunchFailure, "rank 3"));
  CHECK_OK(emDeviceSynchronize(1));
  CHECK_OK(emSyncEventSynchronize(early)); // recorded before the failure
  CHECK_EM(emSyncEventSynchronize(late), emErrorLaunchFailure);
  CHECK(event_done(late) == 1);
  // A new launch on the failed stream is refused: fn never called.
  CHECK_EM(emLaunchKernelAsync(count_call, nullptr, nullptr, 0, 0, a),
           emErrorLaunchFailure);
  CHECK(calls == 2);

  // Through the event to stream b of device 1, when b's worker reaches the
  // wait; then host kernels and copies in order on b fail without running.
  int* d1 = nullptr;
  CHECK_OK(emSetDevice(1));
  CHECK_OK(emMalloc(reinterpret_cast<void**>(&d1), 64));
  CHECK_OK(emSleepAsync(10000, 1, b));
  CHECK_OK(emStreamWaitSyncEvent(1, b, late));
  CHECK_OK(emLaunchKernelAsync(count_call, nullptr, nullptr, 0, 1, b));
  CHECK_EM(emStreamSynchronize(1, b), emErrorLaunchFailure);
  CHECK(std::strcmp(emGetErrorDetail(emErrorLaunchFailure), detail) == 0);
  CHECK(calls == 3);
  CHECK_OK(emSetStream(1, b));
  bool ran = false;
  void* const buffers[] = {d1};
  CHECK_EM(emLaunchKernel([](void* flag) { *static_cast<bool*>(flag) = true; },
                          &ran, buffers, 1),
           emErrorLaunchFailure);
  CHECK(detail_has(emErrorLaunchFailure, "rank 3"));
  CHECK(!ran);
  int host = 7;
  CHECK_EM(emMemcpy(d1, &host, sizeof(int), emMemcpyHostToDevice),
           emErrorLaunchFailure);
  CHECK_EM(emDeviceSynchronize(1), emErrorLaunchFailure);
  // Other streams of the device still work.
  CHECK_OK(emSetStream(1, 0));
  CHECK_OK(emMemcpy(d1, &host, sizeof(int), emMemcpyHostToDevice));
  CHECK_OK(emStreamSynchronize(1, 0));
  CHECK_OK(emFree(d1));
}

void test_kernel_failure() {
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    kernel_failure_checks();
    std::fflush(stderr);
    _exit(failures == 0 ? 0 : 1); // the child's failures were printed
  }
  int status = -1;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
